"""How Click reads a command's arguments, computed from the command's own options (for habits.py): which
tokens are its options, which take the next argument as their value, and how a short token of letters is
read (`-vk4`: -v, then -k 4)."""

from __future__ import annotations


class Reading:
    """A command's options as Click's parser sees them."""

    def __init__(self, params: list) -> None:
        options = [param for param in params if param.param_type_name == "option"]
        named = [(opt, param) for param in options for opt in (*param.opts, *getattr(param, "secondary_opts", []))]
        self.names = {opt for opt, _ in named}
        self.takes_value = {opt for param in options if not getattr(param, "is_flag", False) for opt in param.opts}
        self.flags = self.names - self.takes_value
        self.short = {opt: param for opt, param in named if len(opt) == 2 and opt != "--"}
        self.has_argument = any(param.param_type_name == "argument" for param in params)

    def letters(self, token: str) -> tuple[object | None, str] | None:
        """Click's reading of a short token as the command's letters: the option among them that takes a value
        and the text glued to it ("": the next argument is its value), (None, "") where all are flags; None
        where a letter is no option of the command ("No such option")."""
        for position, letter in enumerate(token[1:], start=1):
            param = self.short.get(f"-{letter}")
            if param is None:
                return None
            if f"-{letter}" in self.takes_value:
                return param, token[position + 1 :]
        return None, ""

    def _short(self, token: str) -> tuple[object | None, str] | None:
        """letters() of a short token; None for a long one (`--bogus`: no letters to read)."""
        return None if token.startswith("--") else self.letters(token)

    def consumes(self, token: str) -> int | None:
        """How many of the arguments after an option token Click takes as its value (0 or 1); None where the
        token is no option of the command."""
        name = token.split("=", 1)[0]
        if name in self.names:  # a long name (`--ctx=8192` carries its value), or one short one
            return int(name in self.takes_value and "=" not in token)
        read = self._short(token)
        if read is None:
            return None
        param, glued = read
        return int(param is not None and not glued)

    def means_here(self, token: str) -> bool:
        """Click reads the short token as the command's own letters, any value glued on one that the option
        takes: it means that here (bench's `-ot`: --output t), whatever another tool means by it. Where that
        reading is an error (`-ngl`: -n gl, not a number), another tool's flag may be named instead."""
        read = self._short(token)
        if read is None:
            return False
        param, glued = read
        return param is None or not glued or _takes(param, glued)


def _takes(param, value: str) -> bool:
    """The option takes the value: its type converts it and, where the command checks it against a few words
    after parsing (--mode, --format, --pair), it is one of them."""
    runtime = getattr(param, "get_runtime_param", None)  # Typer's own options; Click's own (--help, --version)
    try:
        if runtime is not None:
            runtime().coerce(value, param=param, ctx=None)
        else:
            param.type.convert(value, param, None)
    except Exception:  # Click's BadParameter, or a parser's UsageError (`-o=x`)
        return False
    words = _words(param.opts[0])
    if words is None:
        return True
    # --mode and --format in any case, as their callback (app.any_case) takes them; a pair's name as it is
    return (value if param.opts[0] == "--pair" else value.lower()) in words


def _words(option: str) -> set[str] | None:
    if option == "--mode":
        from ..modes import MODES

        return set(MODES)
    if option == "--format":
        from ..benchreport import FORMATS as REPORTS
        from ..outputs import FORMATS

        return {*FORMATS, *REPORTS}
    if option == "--pair":
        from ..errors import SpecchatError
        from ..registry import load_registry

        try:
            return set(load_registry().pairs)
        except SpecchatError:  # a broken overlay: said where the pair is looked up
            return None
    return None
