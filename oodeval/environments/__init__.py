"""oodeval.environments."""
