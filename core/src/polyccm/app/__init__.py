"""Wiring of the controller manager: options, controller table, leader election, serving."""
