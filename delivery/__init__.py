"""Delivery helpers: what CI shows a reviewer (preview comment) and files on drift."""
