"""Stand-in for NVIDIA's tritonclient where the package is not installed:
see tritonclient/http/__init__.py."""
