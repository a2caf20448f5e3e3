"""Outbound notifications: a workspace's endpoints hear of its runs ending, its pages changing and its
credit running low, as Standard Webhooks, signed, retried and logged.

Plain Python over the app database, like `core/`: `events` turns what happened into delivery rows
(in the transaction that records it where it can), `sender` posts them, `endpoints` is what users
manage, `destination` keeps them off private networks. Dagster's sensors are the thin shell that
drives it (sensors/notifications.py).
"""
