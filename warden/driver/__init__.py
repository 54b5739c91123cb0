"""Generated from proto/warden/driver: do not edit."""
