"""The suite DSL, pure: loading and hashing test files, templates, checks, lenient JSON."""
