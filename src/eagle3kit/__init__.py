"""eagle3kit: make EAGLE-3 speculative decoding pay."""

__version__ = "0.1.0"
