"""Helpers shared by tests: real servers and fakes that stand in for the outside world."""
