"""Generated from proto/warden/checkpoint/v1: do not edit."""
