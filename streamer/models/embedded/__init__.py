"""streamer/models/embedded package."""
