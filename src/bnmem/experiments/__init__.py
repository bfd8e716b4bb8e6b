"""Former home of the lenses, kept so documented imports keep working: use :mod:`bnmem.lenses`."""
