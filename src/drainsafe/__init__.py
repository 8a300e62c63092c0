"""drainsafe: take pods and GPU nodes out of service without killing in-flight requests."""

__version__ = "0.1.0"
