"""A user module with a bug: importing it raises."""

raise RuntimeError("calibration file robot.yaml not found")
