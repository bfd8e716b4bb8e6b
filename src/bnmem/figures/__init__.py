"""Every figure bnmem draws (matplotlib, Agg backend), saved one way: :func:`bnmem.figures.save.save_figure`."""
