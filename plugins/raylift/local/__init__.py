"""The embedded `local` target's machinery: a real Ray cluster on this machine."""
