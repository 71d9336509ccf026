"""The test harness: programs built once and kept."""
