"""streamer package."""
