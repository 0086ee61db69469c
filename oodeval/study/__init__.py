"""oodeval.study."""
