"""Idle gaps on each device and their causes."""
