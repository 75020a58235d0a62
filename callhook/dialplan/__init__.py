"""Where calls go and may go. Pure.

Numbers, destinations, caller ids, trunk definitions and outbound limits.
"""
