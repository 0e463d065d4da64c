"""What the test suite injects into real runs; nothing here is used by a conversion unless passed in."""
