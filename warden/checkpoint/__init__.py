"""Generated from proto/warden/checkpoint: do not edit."""
