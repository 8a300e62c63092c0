"""Load plus lifecycle measurement, and settings derived from measurements."""
