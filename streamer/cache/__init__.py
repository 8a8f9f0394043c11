"""streamer/cache package."""
