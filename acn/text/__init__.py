"""Text machinery: tokens, language, zh/en rules, numbers, PII. Pure functions, no I/O."""
