"""Shared machinery: settings, errors and the data shapes every node exchanges."""
