"""The streaming session: frames in, continual compression under a hard cap, questions answered on the memory."""
