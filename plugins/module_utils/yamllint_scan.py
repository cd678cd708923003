# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""yamllint's problems for a file, scanning it once (validate's yamllint rule, validate_yamllint.py).

Imports only PyYAML and yamllint, so validate's yamllint worker processes start quickly.
"""

from __future__ import annotations

import threading

try:
    import yaml
    from yamllint import __version__ as YAMLLINT_VERSION
    from yamllint import linter as yamllint_linter
    from yamllint import parser as yamllint_parser

    HAS_YAMLLINT = True
except ImportError:  # validate_yamllint reports it
    HAS_YAMLLINT = False
    YAMLLINT_VERSION = None

# One scan per file. yamllint 1.38.0 scans each file twice with PyYAML's pure-Python scanner: its syntax check
# (linter.get_syntax_error: yaml.parse with BaseLoader) and its cosmetic rules (parser.token_or_comment_generator:
# BaseLoader.get_token) each make the same tokens; scanning is most of its time. For a file linted through
# lint(), both read one recording of the scanner's tokens instead: the recording asks the scanner for token after
# token as both do, so it holds the same tokens and meets a ScannerError at the same token; the parser reads it
# through the scanner's own interface (check_token, peek_token, get_token). yamllint's run() does everything
# else (directives, rules, the order of problems). Only for the yamllint versions the differential test
# (tests/integration/test_yamllint_scan.py) compares with yamllint.linter.run; any other version is run as is.
SHARED_SCAN_VERSIONS = ("1.38.0",)
_SCAN = threading.local()


class _Recording:
    """The tokens PyYAML's scanner makes for ``buffer`` (BaseLoader, as yamllint scans), and the ScannerError
    met after the last of them (None: the stream ended)."""

    def __init__(self, buffer):
        loader = yaml.BaseLoader(buffer)  # a ReaderError (an unprintable character) is raised here, as yamllint's
        self.tokens, self.error = [], None
        try:
            token = loader.get_token()
            while token is not None:
                self.tokens.append(token)
                token = loader.get_token()
        except yaml.scanner.ScannerError as exc:
            self.error = exc
        finally:
            loader.dispose()


class _Replay:
    """The scanner's interface over a recording: asking past its last token raises the recorded error."""

    def __init__(self, recording):
        self._recording, self._taken = recording, 0

    def _next(self):
        tokens = self._recording.tokens
        if self._taken < len(tokens):
            return tokens[self._taken]
        if self._recording.error is not None:
            raise self._recording.error
        return None

    def check_token(self, *choices):
        token = self._next()
        return token is not None and (not choices or isinstance(token, choices))

    def peek_token(self):
        return self._next()

    def get_token(self):
        token = self._next()
        if token is not None:
            self._taken += 1
        return token


if HAS_YAMLLINT:

    class _ReplayParser(_Replay, yaml.parser.Parser):
        """PyYAML's parser reading a recording (the events yaml.parse makes from the same tokens)."""

        def __init__(self, recording):
            _Replay.__init__(self, recording)
            yaml.parser.Parser.__init__(self)

    _ORIGINAL_SYNTAX_ERROR = yamllint_linter.get_syntax_error
    _ORIGINAL_TOKENS = yamllint_parser.token_or_comment_generator


def _recording(buffer):
    """The recording of ``buffer`` while lint() lints it (made at the first ask), else None."""
    if getattr(_SCAN, "buffer", None) is not buffer:
        return None
    if _SCAN.recording is None:
        _SCAN.recording = _Recording(buffer)
    return _SCAN.recording


def _get_syntax_error(buffer):
    """yamllint.linter.get_syntax_error, parsing the recording."""
    recording = _recording(buffer)
    if recording is None:
        return _ORIGINAL_SYNTAX_ERROR(buffer)
    parser = _ReplayParser(recording)
    try:
        while parser.check_event():
            parser.get_event()
    except yaml.error.MarkedYAMLError as exc:
        return _syntax_problem(exc)
    return None


def _syntax_problem(exc):
    problem = yamllint_linter.LintProblem(
        exc.problem_mark.line + 1, exc.problem_mark.column + 1, "syntax error: " + exc.problem + " (syntax)"
    )
    problem.level = "error"
    return problem


def _token_or_comment_generator(buffer):
    """yamllint.parser.token_or_comment_generator over the recording: each token with its neighbours, then the
    comments up to the next token, until the stream ends or the scanner's error."""
    recording = _recording(buffer)
    if recording is None:
        yield from _ORIGINAL_TOKENS(buffer)
        return
    replay = _Replay(recording)
    try:
        before, current = None, replay.get_token()
        while current is not None:
            after = replay.get_token()
            later = replay.peek_token() if replay.check_token() else None
            yield yamllint_parser.Token(current.start_mark.line + 1, current, before, after, later)
            yield from yamllint_parser.comments_between_tokens(current, after)
            before, current = current, after
    except yaml.scanner.ScannerError:
        pass


if HAS_YAMLLINT and YAMLLINT_VERSION in SHARED_SCAN_VERSIONS:
    yamllint_linter.get_syntax_error = _get_syntax_error
    yamllint_parser.token_or_comment_generator = _token_or_comment_generator


def lint(text, conf, rel):
    """The problems of yamllint.linter.run(text, conf, rel), as a list, the text scanned once."""
    if YAMLLINT_VERSION not in SHARED_SCAN_VERSIONS:
        return list(yamllint_linter.run(text, conf, rel))
    _SCAN.buffer, _SCAN.recording = text, None
    try:
        return list(yamllint_linter.run(text, conf, rel))
    finally:
        _SCAN.buffer = _SCAN.recording = None


def lint_one(conf, rel, text):
    """(problems, None) or (None, (exception type, message)) when yamllint itself fails on the file."""
    try:
        return [(p.line, p.column, p.level, p.desc, p.rule) for p in lint(text, conf, rel)], None
    except Exception as exc:  # pylint: disable=broad-except  # yamllint's own failure (1.38.0: a stray "]")
        return None, (type(exc).__name__, str(exc))
