"""streamer/models package."""
