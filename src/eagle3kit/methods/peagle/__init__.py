"""peagle."""
