"""Generated from proto/warden/toolrunner/v1: do not edit."""
