"""Generated from proto/warden/toolrunner: do not edit."""
