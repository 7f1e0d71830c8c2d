"""Three-state calibration of the contract classes and the advice that would catch a bad kernel."""
