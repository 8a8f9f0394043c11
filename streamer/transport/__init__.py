"""streamer/transport package."""
