"""What stands in for container images: the image archives real nodes import, and the
tools an image brings (busybox's ``nslookup`` of ``alpine:3.10``). Imports ``network`` and
``common``."""
