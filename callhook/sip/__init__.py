"""SIP for callhook, sans-IO: messages, SDP, transactions, dialogs and the user agent (RFC 3261)."""
