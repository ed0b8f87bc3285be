"""The API's JSON parser: DRF's, with a body nested too deeply for Python's parser answered
as malformed (400) like any other body that is not JSON, not as a server error, and a body
holding what the database cannot store (a NUL, a number past 64 bits) a 400 naming the field
(``kernel.storable``)."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        # Imported here: DRF imports this module while kernel.errors (which storable
        # needs) is still being imported.
        from .storable import storable

        return storable(data)
