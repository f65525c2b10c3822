"""The explorer's widgets and screens, one per file."""
