"""The sections of `Settings` (acn/common/settings.py composes them), one module each."""
