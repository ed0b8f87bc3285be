"""The API's JSON parser: DRF's, with a body nested too deeply for Python's parser answered
as malformed (400) like any other body that is not JSON, not as a server error."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
