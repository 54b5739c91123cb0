"""Generated from proto/warden/driver/v1: do not edit."""
