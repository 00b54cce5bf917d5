"""Builders and runners the test modules share (imported as ``helpers.<module>``)."""
