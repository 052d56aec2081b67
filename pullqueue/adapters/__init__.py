"""Backends behind the pull-queue interface, one module each, reached through `connect(url)`.

`base` holds the Backend protocol; `memory`, `pubsub`, `cloudtasks` and `appengine` implement it.
"""
