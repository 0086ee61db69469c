"""oodeval.training."""
