import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_wsgi_application()

# Embedded default: run the durable worker loop inside the web process.
from durable.worker import start_embedded  # noqa: E402

start_embedded()
