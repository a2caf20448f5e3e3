"""Sensors: the triggers that turn app-database rows into pipeline runs, and the safety nets around them."""
