"""The appliance console (``serve console``): a web UI for informatics, compliance, clinicians and IT, behind the
hospital's single sign-on (or standalone on loopback with a one-time login link). Server-rendered, no script."""
