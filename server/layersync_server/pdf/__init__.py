"""PDF annotations in and out of the server's records (the admin API's import and export).

* :mod:`.import_` — a PDF's annotations and form values as Instant JSON records;
* :mod:`.export` — records written into the PDF as annotations (and form values);
* :mod:`.appearance` — appearance streams for the exported annotations;
* :mod:`.geometry` — page space (rotation, crop box) between PDF and Instant JSON;
* :mod:`.values` — colours, text strings and default-appearance strings.
"""
