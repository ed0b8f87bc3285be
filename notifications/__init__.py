"""Notifications: what users (and groups) subscribe to, and its delivery by email, webhooks
and the dashboard through an outbox (``models.Notification``) written in the transaction of
the change that caused it and sent by the Celery workers."""
