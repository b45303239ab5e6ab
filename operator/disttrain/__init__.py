"""The operator, in folders by concern, each layer building only on those below it: ``api``
< ``children`` < ``diagnosis`` < ``reconcile`` < ``admissioncheck`` (all pure) < ``shell``
(the I/O); ``make lint`` enforces the order."""
