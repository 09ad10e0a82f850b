"""vpatch: declarative, verified, reversible source patches for installed Python packages."""

__version__ = "0.1.0"
