"""Drop-in layers shaped like APIs services already call.

`pullqueue.compat.taskqueue` mirrors `google.appengine.api.taskqueue` for pull queues.
"""
