"""Flags typed from habit in llama.cpp, Ollama, LM Studio or vLLM (specchat/cli/habits.py): one line that
names specchat's own option, exit 2, before Click reads them as something else."""

from __future__ import annotations

import fake_backend
import pytest
from test_cli import assert_one_line_error, invoke


@pytest.fixture
def files(isolated):
    target, draft = fake_backend.write_pair(isolated / "files", reply="Seen: {history}")
    return ["--target", str(target), "--draft", str(draft), "--mode", "target", "-n", "400"]


def test_c_then_a_number_is_llama_cpps_context_size_not_a_prompt_to_continue_with(files):
    """`run -c 4096` continued the latest conversation with the prompt "4096" and answered it."""
    assert invoke("run", *files, "Hello there").exit_code == 0
    result = invoke("run", *files, "-c", "4096")
    assert_one_line_error(result, 2, "-c is --continue here; the context size is --ctx 4096")
    assert "Seen" not in result.stdout


def test_c_with_a_prompt_still_continues(files):
    assert invoke("run", *files, "Hello there").exit_code == 0
    for prompt in (["-c", "2+2"], ["--continue", "4096"]):  # the long name means what it says
        result = invoke("run", *files, *prompt)
        assert result.exit_code == 0 and "Hello there" in result.stdout, result.output


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "-m", "model.gguf", "hi"], "-m is --mode here; a model file is --target model.gguf"),
        (["serve", "-m", "models/x.gguf"], "-m is --mode here; a model file is --target models/x.gguf"),
        (["export", "--to", "vllm", "-m", "Qwen/Qwen2.5-7B"], "-m is --mode here"),
        (["tune", "-m", "x.gguf"], "-m is not an option here: a model file is --target FILE"),
        (["run", "-p", "write a haiku"], '-p is --pair here; the prompt is the argument: specchat run "write a haiku"'),
        (
            ["run", "-f", "prompt.txt", "add type hints"],  # llama-cli's -f FILE with an instruction: kept in the hint
            "-f is --format here; a prompt from a file is stdin: specchat run < prompt.txt (with an instruction: "
            'specchat run "..." < prompt.txt)',
        ),
        (["bench", "-f", "p.jsonl"], "-f is --format here; prompts from a file: --prompts p.jsonl"),
        (["run", "--draft", "8", "hi"], "--draft is the draft model's file here; the draft length is -k 8"),
    ],
)
def test_a_flag_specchat_has_given_what_llama_cpp_gives_it(isolated, command, needle):
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "--ctx-size", "4096", "hi"], "--ctx-size is --ctx here"),
        (["serve", "-c", "8192"], "-c is --ctx here"),
        (["run", "-md", "d.gguf", "hi"], "-md is --draft here"),
        (["run", "--model", "x.gguf", "hi"], "--model is --target FILE here"),
        (["run", "--n-predict", "10", "hi"], "--n-predict is -n/--max-tokens here"),
        (["tune", "-t", "4"], "-t is --threads here"),
        (["run", "-ngl", "99", "hi"], "-ngl is --gpu-layers here"),  # read as `-n gl`
        (["serve", "-ngld", "99"], "-ngld is --draft-gpu-layers here"),
        (["run", "--draft-max", "8", "hi"], "--draft-max is -k/--draft-tokens here"),
        (["run", "--draft-min", "2", "hi"], "--draft-min has no equivalent"),
        (["run", "--temp=0.7", "hi"], "--temp is --temperature here"),
        (["run", "--repeat-penalty", "1.1", "hi"], "--repeat-penalty has no equivalent"),
        (["run", "-fa", "hi"], "-fa has no equivalent"),  # read as `-f a`
        (["run", "-s", "42", "hi"], "-s is --seed here"),
        (["run", "-sys", "be brief", "hi"], "-sys is --system here"),
        (["run", "-cnv"], "-cnv has no equivalent: `specchat run` with no prompt is the chat"),
        (["run", "--jinja", "hi"], "--jinja has no equivalent: the GGUF's own chat template is always used"),
        (["tune", "--chat-template-kwargs", "{}"], "--chat-template-kwargs has no equivalent here: `specchat run`"),
        (["run", "--prompt", "hi"], '--prompt has no equivalent: the prompt is the argument: specchat run "PROMPT"'),
        (["serve", "--spec-type", "ngram-simple"], "--spec-type is --mode here"),
        (["bench", "--spec-type", "ngram-simple"], "--spec-type is --modes here"),
        (["serve", "-np", "4"], "-np has no equivalent: requests run one at a time here"),
        (["serve", "--batch-size", "512"], "--batch-size has no equivalent: the batch sizes are specchat's own"),
        (["run", "--color", "hi"], "--color has no equivalent: colours are on where stdout is a terminal"),
        (["serve", "--device", "CUDA0"], "--device has no equivalent: llama.cpp offloads to the GPUs it finds"),
        (["run", "-devd", "CUDA0", "hi"], "-devd has no equivalent"),
        (["serve", "--max-model-len", "8192"], "--max-model-len is --ctx here"),
        (["export", "--to", "vllm", "--speculative-config", "{}"], "--speculative-config is --draft FILE with -k N"),
    ],
)
def test_a_flag_of_another_tool_names_specchats_own(isolated, command, needle):
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize("command", [["run", "-np", "4", "hi"], ["bench", "-np", "4"], ["tune", "-np", "4"]])
def test_np_outside_serve_is_named_not_read_as_n(isolated, command):
    """llama.cpp's `-np 4` (parallel slots) was read as `-n p` outside serve: "Invalid value for '--max-tokens'
    / '-n': 'p' is not a whole number", where usage.md says that no habit is misread so."""
    assert_one_line_error(invoke(*command), 2, "-np has no equivalent: one generation runs at a time")


def test_a_flag_whose_equivalent_the_command_lacks_keeps_clicks_error(isolated):
    assert_one_line_error(invoke("logs", "--ctx-size", "3"), 2, "No such option: --ctx-size")


def test_a_habit_given_as_an_options_value_or_after_double_dash_is_left_alone(files):
    result = invoke("run", *files, "--system", "-sys", "--", "-c")
    assert result.exit_code == 0 and "-sys" in result.stdout and "-c" in result.stdout, result.output
    assert invoke("logs", "-q", "-fa").exit_code == 0


def test_help_is_shown_whatever_else_is_given(isolated):
    assert invoke("run", "-c", "4096", "--help").exit_code == 0


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "qwen2.5-coder:1.5b"], "is a pair: give it as --pair qwen2.5-coder-1.5b (the prompt goes after it)"),
        (["run", "qwen2.5-coder-1.5b", "hi"], "is a pair: give it as --pair qwen2.5-coder-1.5b"),
        (["run", "model.gguf"], "model.gguf reads as a model: here a model file is --target FILE"),
        (["serve", "mistralai/Mistral-7B-Instruct-v0.3"], "reads as a model: here a model file is --target FILE"),
        (
            ["serve", "mistralai/Mistral-7B-Instruct-v0.3", "--dtype", "auto"],
            "--dtype has no equivalent",  # vLLM's flag after it: named as it is read, before the model
        ),
        (["run", "--bogus=1", "model.gguf"], "model.gguf reads as a model"),  # --bogus has its value
        # `tune PAIR` and `pull PAIR` take the pair as a word; bench's and export's "Got unexpected extra argument(s)"
        # did not name --pair, which `serve PAIR` names
        (["bench", "qwen2.5-coder-7b"], "is a pair: give it as --pair qwen2.5-coder-7b (bench takes no argument)"),
        (["export", "--to", "vllm", "qwen2.5-7b"], "give it as --pair qwen2.5-7b (export takes no argument)"),
        (["bench", "model.gguf"], "model.gguf reads as a model: here a model file is --target FILE"),
        (["export", "--to", "vllm", "bartowski/Qwen2.5-7B-Instruct-GGUF"], "give it as --pair qwen2.5-7b (export"),
    ],
)
def test_a_model_where_the_prompt_goes_ollama_run_or_vllm_serve(isolated, command, needle):
    """`specchat run MODEL` (Ollama's habit) answered the model's name as a prompt; a pair or model given to bench
    or export as a word is named as serve names it."""
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["bench", "data/prompts.jsonl"], "unexpected extra argument"),  # --prompts was meant: no model
        (["bench", "--prompts", "p.jsonl", "results/out.json"], "unexpected extra argument"),  # -o was meant
        (["export", "--to", "vllm", "--json", "out/x.json"], "--json takes no value ('out/x.json' after it)"),
    ],
)
def test_a_path_given_to_bench_or_export_is_not_called_a_model(isolated, command, needle):
    """The pair-as-a-word hint (this session) took any word with a slash for a model, the rule serve has: a path
    given to bench or export is a file meant for an option, and "--json takes no value" said it better."""
    result = invoke(*command)
    assert_one_line_error(result, 2, needle)
    assert "reads as a model" not in result.stderr


def test_a_one_word_prompt_with_a_slash_is_a_prompt(files):
    result = invoke("run", *files, "src/a.py")
    assert result.exit_code == 0 and "src/a.py" in result.stdout, result.output


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("list", "`specchat models`"),
        ("chat", "`specchat run` with no prompt"),
        ("version", "`specchat --version` prints it"),  # lms version
        ("show", "`specchat models` shows each pair's models"),  # ollama show
        ("rm", "the models are files: `specchat models` prints their directory"),  # ollama rm
        ("ps", "`specchat serve` holds one pair"),  # ollama ps
        ("load", "`specchat serve --pair NAME` loads a pair"),  # lms load
        ("prompt", '`specchat run "PROMPT"` answers one'),  # llm prompt
    ],
)
def test_another_tools_command_names_specchats(isolated, name, needle):
    assert_one_line_error(invoke(name), 2, f"no command '{name}': {needle}")


def test_a_prompt_where_the_command_goes_names_run(isolated):
    """simonw/llm's `llm "why is the sky blue"` was "No such command 'why is the sky blue'"."""
    result = invoke("why is the sky blue")
    assert_one_line_error(result, 2, "no command 'why is the sky blue': a prompt goes to run")
    assert 'specchat run "why is the sky blue"' in result.stderr


@pytest.mark.parametrize("command", [[], ["run"], ["serve"], ["logs"]])
def test_h_is_help_as_in_llama_cpp(command):
    """`-h` was "No such option: -h"; no command uses it for anything else."""
    result = invoke(*command, "-h")
    assert result.exit_code == 0 and "Usage" in result.stdout, result.output


def test_usage_md_lists_every_flag_the_table_refuses():
    from test_docs import _section

    from specchat.cli.habits import FOREIGN

    section = _section("usage.md", "Coming from other tools")
    missing = [flag for flag in FOREIGN if f"`{flag}" not in section and f"/{flag}" not in section]
    assert not missing


@pytest.mark.parametrize(
    "command",
    [
        ["pull", "qwen2.5-coder:7b"],
        ["tune", "llama3.1:8b"],
        ["run", "-p", "qwen2.5:7b", "hi"],
        ["export", "--to", "vllm", "--pair", "gemma3:12b"],
    ],
)
def test_ollamas_name_for_a_pair_names_the_pair(isolated, command):
    """`specchat pull qwen2.5-coder:7b` (Ollama's NAME:TAG) was "unknown pair", with the list to search."""
    name = next(arg for arg in command if ":" in arg)
    assert_one_line_error(invoke(*command), 2, f"{name} is Ollama's name; the pair is {name.replace(':', '-')}")


@pytest.mark.parametrize("args", [["-p", "hello"], ["-p", "hello", "hi"], ["-phello"]])
def test_p_and_a_word_that_is_no_pair_says_p_is_pair(isolated, args):
    """llama.cpp's `-p hello` (its prompt) was "unknown pair 'hello'", which did not say why."""
    result = invoke("run", *args)
    needle = "unknown pair 'hello': -p is --pair here; a prompt is the argument: specchat run \"hello\""
    assert_one_line_error(result, 2, needle)
    assert "known pairs: " in result.stderr and "qwen2.5-coder-1.5b" in result.stderr


@pytest.mark.parametrize(
    ("word", "needle", "hint"),
    [
        ("qwen2.5-coder-7B", "unknown pair 'qwen2.5-coder-7B'", "did you mean qwen2.5-coder-7b?"),
        ("qwen2.5-coder-1.5b-instruct-q4_k_m", "is a model, not a pair", "give its pair: qwen2.5-coder-1.5b"),
    ],
)
def test_p_and_a_near_miss_or_a_models_name_keeps_the_registrys_word(isolated, word, needle, hint):
    """-p is how most type --pair: its "a prompt is the argument" hid the registry's "did you mean" and "is a
    model" (and told someone who typed a pair's name with a capital letter to make it a prompt)."""
    result = invoke("run", "-p", word, "hi")
    assert_one_line_error(result, 2, needle)
    assert hint in result.stderr and "a prompt is the argument" not in result.stderr


def test_p_and_a_pair_is_that_pair(overlay):
    overlay(
        '[pairs.mine]\ntarget = "qwen2.5-coder-1.5b-instruct-q4_k_m"\ndraft = "qwen2.5-coder-0.5b-instruct-q4_k_m"\n'
    )
    from specchat.cli import habits

    for name in ("mine", "qwen2.5-coder-1.5b"):
        assert habits.FOLLOWED_BY["-p"]("run", name) is None
    long_name = invoke("run", "--pair", "hello", "hi")  # no habit: the registry's own error
    assert_one_line_error(long_name, 2, "unknown pair 'hello'")
    assert "-p is --pair" not in long_name.stderr


def test_a_format_is_a_format_even_where_a_file_has_its_name(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "json").write_text("{}")
    assert invoke("run", *files, "-f", "json", "hi").exit_code == 0


@pytest.mark.parametrize("flag", ["-ctk", "-ctv", "-ub", "-b", "-co", "-dev"])
def test_a_short_flag_click_would_split_is_named_whole(isolated, flag):
    """`-ctk q8_0` was "No such option: -t" (read as -c -t -k), `-co` "No such option: -o", `-dev` "-d":
    the user never typed those."""
    assert_one_line_error(invoke("run", flag, "q8_0", "hi"), 2, f"{flag} has no equivalent")


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "-t4", "hi"], "-t is --threads here"),
        (["serve", "-c4096"], "-c is --ctx here"),
        (["run", "-c4096"], "-c is --continue here; the context size is --ctx 4096"),
        (["run", "-ngl99", "hi"], "-ngl is --gpu-layers here"),
        (["run", "-b512", "hi"], "-b has no equivalent"),
        (["run", "-n-1", "hi"], "-n -1 is llama.cpp's no limit"),
    ],
)
def test_a_flag_with_its_number_glued_on_is_judged_as_typed_apart(isolated, command, needle):
    """`-t4` was "No such option: -t", `-ngl99` read as `-n gl99`: the table did not know them glued."""
    assert_one_line_error(invoke(*command), 2, needle)


def test_specchats_own_short_flags_glued_together_still_work(files):
    assert invoke("run", *files, "Hello there").exit_code == 0
    result = invoke("run", *files, "-vc", "-k4", "-n400", "2+2")  # -v -c; -k 4; -n 400
    assert result.exit_code == 0 and "Hello" in result.stdout, result.output


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["bench", "-o", "json"], "-o is --output FILE here; the report's format is -f json"),
        (["bench", "-p", "512"], "-p is --pair here; llama-bench's prompt length has no equivalent"),
    ],
)
def test_llama_bench_habits(isolated, monkeypatch, command, needle):
    """llama-bench's `-o json` (its output format) wrote the report, as markdown, to a file named json."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no download, where the habit went through
    monkeypatch.chdir(isolated)
    assert_one_line_error(invoke(*command), 2, needle)
    assert not (isolated / "json").exists()


@pytest.mark.parametrize("flag", ["-n", "--max-tokens"])
def test_n_minus_one_names_the_limit_that_is_none(isolated, flag):
    """llama.cpp's `-n -1` (no limit) was "-1 is less than 0: give 0 or more", without saying what 0 means."""
    assert_one_line_error(invoke("run", flag, "-1", "hi"), 2, f"{flag} -1 is llama.cpp's no limit; here that is -n 0")


@pytest.mark.parametrize("flag", ["--temp", "--temperature", "--top-k", "--seed", "-s"])
def test_sampling_flags_given_to_serve_say_that_requests_set_them(isolated, flag):
    """`llama-server --temp 0.7` sets its default; serve takes sampling per request, and said only
    "No such option"."""
    assert_one_line_error(invoke("serve", flag, "1"), 2, f"{flag} has no equivalent in serve: each request sets")


def test_a_prompt_that_ends_in_gguf_is_a_prompt(files):
    """A one-word model file name is refused where the prompt goes; "how do I make a .gguf" was refused too."""
    result = invoke("run", *files, "how do I convert safetensors to .gguf")
    assert result.exit_code == 0 and "convert safetensors" in result.stdout, result.output


def test_after_double_dash_any_word_is_a_prompt(files):
    """`--` is the way to send a word the checks would take for a model or a pair."""
    for word in ("model.gguf", "qwen2.5-coder-1.5b"):
        result = invoke("run", *files, "--", word)
        assert result.exit_code == 0 and word in result.stdout, result.output


def test_a_pair_of_ones_own_named_with_a_colon_is_that_pair(overlay):
    """A user's pair named `coder:1.5b` was "Ollama's name; the pair is coder:1.5b" wherever a pair goes."""
    overlay(
        '[pairs."coder:1.5b"]\nfamily = "qwen2.5"\n'
        'target = "qwen2.5-coder-1.5b-instruct-q4_k_m"\ndraft = "qwen2.5-coder-0.5b-instruct-q4_k_m"\n'
    )
    from specchat.cli import habits

    habits._positional("pull", ["coder:1.5b"])  # tune and pull: their PAIR argument
    assert habits.FOLLOWED_BY["--pair"]("run", "coder:1.5b") is None  # --pair
    assert habits.FOLLOWED_BY["-p"]("export", "coder:1.5b") is None


@pytest.mark.parametrize(
    ("command", "needle"),
    [(["bench", "--draft", "8"], "the draft length is --ks 8"), (["tune", "--draft", "8"], "tune measures every")],
)
def test_the_draft_length_hint_names_an_option_the_command_has(isolated, command, needle):
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize("command", [["run", "hi"], ["bench"], ["serve"], ["tune"]])
@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("-sm", "has no equivalent: llama.cpp splits the layers over the GPUs it sees"),  # "No such option: -s"
        ("--split-mode", "has no equivalent: llama.cpp splits the layers"),
        ("-mg", "has no equivalent: llama.cpp splits the layers"),  # run and serve: --mode 'g', an extra argument
        ("--main-gpu", "has no equivalent: llama.cpp splits the layers"),
        ("-ts", "has no equivalent: llama.cpp splits the layers"),  # "No such option: -t"
        ("--tensor-split", "has no equivalent: llama.cpp splits the layers"),
        ("-ot", "has no equivalent: only how many layers go to the GPU is set"),  # "No such option: -o"
        ("--override-tensor", "has no equivalent: only how many layers go to the GPU is set"),
    ],
)
def test_llama_cpps_gpu_placement_flags_are_named_whole(isolated, command, flag, needle):
    # bench reads -ot as -o t (--output t), but with a value after it the line is llama-bench's: named so too
    assert_one_line_error(invoke(command[0], flag, "1", *command[1:]), 2, f"{flag} {needle}")


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "-sysf", "s.txt", "hi"], '-sysf is --system "$(cat FILE)" here'),  # "No such option: -s"
        (["run", "--system-prompt-file", "s.txt", "hi"], '--system-prompt-file is --system "$(cat FILE)" here'),
        (["serve", "-sysf", "s.txt"], "-sysf has no equivalent in serve: each request's messages carry its system"),
        (["serve", "-sys", "be brief"], "-sys has no equivalent in serve"),  # "No such option: -s"
        (["run", "-r", "User:", "hi"], "-r has no equivalent: a reply ends at the model's end of turn"),
        (["run", "--reverse-prompt", "User:", "hi"], "--reverse-prompt has no equivalent: a reply ends"),
        (["serve", "-r", "User:"], "-r has no equivalent in serve: each request's 'stop' strings end its reply"),
        (["run", "-st", "hi"], "-st has no equivalent: a prompt given is answered once"),
        (["run", "-e", "a\\nb"], "-e has no equivalent: the prompt is sent as typed"),
        (["serve", "-jf", "s.json"], "-jf has no equivalent: replies follow no grammar or JSON schema"),  # -j
        (["serve", "-mm", "proj.gguf"], "-mm has no equivalent: specchat runs text models only"),  # --mode 'm'
        (["serve", "-cb"], "-cb has no equivalent: requests run one at a time here"),  # "No such option: -c"
        (["run", "-nkvo", "hi"], "-nkvo has no equivalent: the KV cache goes where its layers go"),  # -n 'kvo'
        (["serve", "-ctkd", "q8_0"], "-ctkd has no equivalent: the KV cache keeps llama.cpp's default type"),
        (["run", "--no-mmap", "hi"], "--no-mmap has no equivalent: model files are memory-mapped"),
        (["bench", "-pg", "512,128"], "-pg has no equivalent: the prompts are --suite's or --prompts'"),  # -p 'g'
        (["pull", "-hff", "x.gguf"], "-hff has no equivalent: models come as pairs here"),  # -h: the help
        (["tune", "-tbd", "4"], "-tbd is --threads here"),
    ],
)
def test_more_llama_cpp_flags_name_specchats_way(isolated, command, needle):
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["serve", "-kvu"], "-kvu is llama.cpp's; `specchat serve` has no such option"),  # -k 'vu'
        (["serve", "-to", "600"], "-to is llama.cpp's; `specchat serve` has no such option"),  # "No such option: -t"
        (["tune", "-sys", "be brief"], "-sys is llama.cpp's; `specchat tune` has no such option"),  # "-s"
        (["logs", "-ngl", "99"], "-ngl is llama.cpp's; `specchat logs` has no such option"),  # -n 'gl'
        (["export", "--to", "vllm", "-np", "4"], "-np is llama.cpp's; `specchat export` has no such option"),
    ],
)
def test_a_llama_cpp_short_flag_the_command_has_nothing_for_is_named_whole(isolated, command, needle):
    """Where no entry fits the command, Click named one letter of the flag (or read the rest as a value)."""
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["logs", "--path", ""], "--path takes no value ('' after it)"),  # "Got unexpected extra argument(s) ()"
        (["logs", "--path", "old.db"], "--path takes no value ('old.db' after it)"),
        (["models", "--json", "x"], "--json takes no value ('x' after it)"),
        (["logs", ""], "`specchat logs` takes no argument (an empty one, '', was given)"),
    ],
)
def test_a_word_after_a_flag_of_a_command_without_arguments_names_the_flag(isolated, command, needle):
    result = invoke(*command)
    assert_one_line_error(result, 2, needle)
    assert "unexpected extra argument" not in result.stderr


def test_logs_path_says_how_to_read_another_log(isolated):
    assert "SPECCHAT_DATA_DIR=DIR specchat logs" in invoke("logs", "--path", "").stderr


def test_a_word_after_a_value_or_no_flag_keeps_clicks_error(isolated):
    assert_one_line_error(invoke("logs", "x"), 2, "Got unexpected extra argument(s) (x)")
    assert_one_line_error(invoke("logs", "-q", "--path", "x"), 2, "Got unexpected extra argument(s) (x)")


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (
            ["run", "--gpu-layers", "all", "hi"],
            "--gpu-layers all is llama.cpp's word; here every layer is --gpu-layers -1",
        ),
        (["serve", "--draft-gpu-layers=auto"], "--draft-gpu-layers auto is llama.cpp's word"),
        (["run", "--draft=8", "hi"], "--draft is the draft model's file here; the draft length is -k 8"),
        (["run", "--max-tokens=-1", "hi"], "--max-tokens -1 is llama.cpp's no limit; here that is -n 0"),
    ],
)
def test_llama_cpps_values_for_specchats_options_are_named_with_equals_too(isolated, command, needle):
    """`--gpu-layers all` (llama.cpp's -ngl all) was "'all' is not a whole number"; `--draft=8` slipped past the
    check that `--draft 8` met (a draft model named 8 "does not exist")."""
    assert_one_line_error(invoke(*command), 2, needle)


def test_a_prompt_of_several_unquoted_words_says_to_quote_it(isolated):
    """`ollama run MODEL why is the sky blue` takes the words as one prompt; `specchat run why is the sky blue`
    said "Got unexpected extra argument(s) (is the sky blue)"."""
    result = invoke("run", "why", "is", "the", "sky", "blue")
    assert_one_line_error(result, 2, "the prompt is one argument: 5 were given")
    assert 'quote it: specchat run "why is the sky blue"' in result.stderr


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["add type hints", "{f}"], 'a file goes in on stdin: specchat run "add type hints" < {f}'),
        (["{f}", "add type hints"], 'a file goes in on stdin: specchat run "add type hints" < {f}'),
        (["{f}", "{f}"], "files go in on stdin: cat {f} {f} | specchat run"),
    ],
)
def test_a_file_named_after_the_prompt_says_its_text_goes_in_on_stdin(isolated, monkeypatch, args, hint):
    """`specchat run "add type hints" some_file.py` (as llm, aichat or a shell habit would have it) said to quote
    the words into one prompt, `specchat run "add type hints some_file.py"`: the model got the file's name, never
    its text. A word that names a file says how the file goes in."""
    monkeypatch.chdir(isolated)
    (isolated / "some_file.py").write_text("def f(x):\n    return x\n")
    result = invoke("run", *[arg.format(f="some_file.py") for arg in args])
    assert_one_line_error(result, 2, "the prompt is one argument: 2 were given")
    assert hint.format(f="some_file.py") in result.stderr


@pytest.mark.parametrize(
    ("args", "quoted"),
    [
        (["--", "why", "is", "the", "sky", "blue"], 'specchat run "why is the sky blue"'),
        (["hi", "--", "there"], 'specchat run "hi there"'),
        (["--", "-x", "marks", "the", "spot"], 'specchat run -- "-x marks the spot"'),
    ],
)
def test_several_words_after_double_dash_say_to_quote_them_too(isolated, args, quoted):
    """`run -- why is the sky blue` was Click's "Got unexpected extra argument(s) (is the sky blue)", where the
    same words without `--` said to quote them."""
    result = invoke("run", *args)
    assert_one_line_error(result, 2, f"the prompt is one argument: {len(args) - 1} were given")
    assert f"quote it: {quoted}" in result.stderr


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "--bogus", "3", "hello"], "No such option: --bogus"),
        (["run", "-x", "3", "hello"], "No such option: -x"),
        (["run", "-zq", "2", "hi"], "No such option: -z"),
        (["models", "--bogus", ""], "No such option: --bogus"),
        (["run", "--bogus", "x.gguf"], "No such option: --bogus"),
        (["run", "-x", "qwen2.5-coder-1.5b"], "No such option: -x"),
        (["serve", "--bogus", "Qwen/Qwen2.5-7B-Instruct"], "No such option: --bogus"),
    ],
)
def test_an_unknown_options_value_is_not_taken_for_a_second_prompt_word(isolated, command, needle):
    """The word after an option the command lacks may be its value: `run --bogus 3 hello` was 'the prompt is one
    argument: 2 were given ... quote it: specchat run "3 hello"', which hid the unknown option; `run --bogus
    x.gguf` was 'x.gguf reads as a model', a model where the prompt goes, which it was not."""
    assert_one_line_error(invoke(*command), 2, needle)


def test_a_value_for_the_last_of_several_short_flags_is_no_prompt_word(files):
    """`-vk 4` is -v, -k 4: the 4 was counted as a second word of the prompt, and the line refused."""
    result = invoke("run", *files, "-vk", "4", "hello there")
    assert result.exit_code == 0 and "hello there" in result.stdout, result.output


def test_no_other_tools_short_flag_shadows_what_click_reads_it_as(isolated):
    """bench's `-ot`, `-otd`, `-oe`, `-ofreq` are -o t, -o td, ... (--output FILE, its value glued on), as they
    were before llama.cpp's flags of those names were named. For every command, a short flag of the tables is
    named only where Click's own reading of it is an error (`-ngl`: -n gl), or its value is one checked
    against a few words that it is none of (`-mg`: --mode g)."""
    import typer
    import typer.main
    from typer import _click

    from specchat.benchreport import FORMATS as REPORTS
    from specchat.cli import app, habits
    from specchat.errors import SpecchatError
    from specchat.modes import MODES
    from specchat.outputs import FORMATS
    from specchat.registry import load_registry

    words = {"--mode": set(MODES), "--format": {*FORMATS, *REPORTS}, "--pair": set(load_registry().pairs)}
    group = typer.main.get_command(app)
    root = group.make_context("specchat", ["models"])
    flags = [flag for flag in (*habits.FOREIGN, *habits.LLAMA_SHORT) if flag[:2] != "--" and len(flag) > 2]
    shadowing = []
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        required = ["--to", "vllm"] if name == "export" else []
        for flag in flags:
            try:
                read = command.make_context(name, [*required, flag], parent=root).params
            except (_click.ClickException, SpecchatError):
                continue  # an error before the tables, as now
            except typer.Exit:
                continue  # `-hf`: -h, the help, where llama.cpp's Hugging Face repository was meant
            checked = {param.name: words[param.opts[0]] for param in command.params if param.opts[0] in words}
            if any(read[key] not in known for key, known in checked.items() if read.get(key)):
                continue  # --mode g: refused once parsed
            read = {key: value for key, value in read.items() if value not in (None, False, 0, "")}
            try:
                habits.check(name, command.params, [*required, flag])
            except SpecchatError as error:
                shadowing.append(f"{name} {flag} ({read}): {error.message}")
    assert not shadowing, shadowing


def test_a_glued_value_is_judged_on_clicks_own_options_too():
    """reading._takes asked only Typer 0.29's get_runtime_param(), which older Typers lack:
    there every glued value was refused, and bench -ot went back to being named as llama.cpp's flag."""
    import click

    from specchat.cli.reading import _takes

    count, name = click.Option(["-k"], type=int), click.Option(["-o"], type=str)
    assert not hasattr(count, "get_runtime_param")
    assert _takes(count, "4") and not _takes(count, "vu") and _takes(name, "t")
    assert _takes(click.Option(["--format", "-f"], type=str), "JSON")  # -fJSON: taken in any case, as -f JSON


@pytest.mark.parametrize("args", [["-ot", "exps=CPU"], ["-otd", "x"], ["-ot", "0", "hi"]])
def test_llama_bench_s_override_tensor_with_its_value_is_named_though_bench_reads_ot_as_output(isolated, args):
    """bench reads `-ot` as -o t (--output t) again, and llama-bench's `-ot exps=CPU` then got Click's 'Got
    unexpected extra argument(s) (exps=CPU)' instead of the line that says what specchat places on the GPU."""
    assert_one_line_error(invoke("bench", *args), 2, f"{args[0]} has no equivalent")


def test_every_hint_names_options_the_command_has():
    """`serve --jinja` said '(--no-template: none)', and `bench`/`tune --speculative-config` '-k N' and '--mode
    spec': options only `run` (or run and serve) have, so the line sent people to a second error."""
    import re

    import typer.main

    from specchat.cli import app, habits
    from specchat.cli.reading import Reading
    from specchat.errors import SpecchatError

    group = typer.main.get_command(app)
    root = group.make_context("specchat", ["models"])
    wrong = []
    for name in group.list_commands(root):
        names = Reading(group.get_command(root, name).params).names
        for flag in habits.FOREIGN:
            try:
                habits._foreign(name, flag, names)
                continue
            except SpecchatError as error:
                said = error.message.split(" ", 1)[1]
            said = said.split("`specchat ")[0]  # another command's options, named with the command
            wrong += [f"{name} {flag}: {said}" for option in re.findall(r"(?<![\w-])--?[a-z][\w-]*", said)
                      if option not in names]  # fmt: skip
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "-s", "be brief", "hi"], '-s is not an option here: a system prompt is --system "be brief"'),
        (["run", "-s=pirate", "hi"], '-s is not an option here: a system prompt is --system "pirate" (a seed:'),
        (["serve", "-s", "be brief"], "-s has no equivalent in serve: each request's messages carry its system"),
        (["run", "-s", "42", "hi"], "-s is --seed here"),  # llama.cpp's, a number
        (["run", "-s", "-1", "hi"], "-s is --seed here"),
    ],
)
def test_s_and_words_is_llms_system_prompt_not_llama_cpps_seed(isolated, command, needle):
    """simonw/llm's `-s "be brief"` (its --system) was told '-s is --seed here': a seed of "be brief"."""
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"], "is pair qwen2.5-coder-1.5b's Hugging Face repository"),
        (["run", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "hi"], "give it as --pair qwen2.5-coder-1.5b"),
        (["run", "hf.co/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M"], "is pair qwen2.5-coder-1.5b's Hugging"),
        (["run", "Qwen/Qwen2.5-Coder-1.5B-Instruct"], "is pair qwen2.5-coder-1.5b's Hugging Face repository"),
        (["run", "bartowski/Llama-3.2-1B-Instruct-GGUF"], "reads as a Hugging Face repository: models come as pairs"),
        (["run", "someone/Some-Model-GGUF:Q8_0"], "reads as a Hugging Face repository"),
        (["run", "hf.co/someone/some-model", "hi"], "reads as a Hugging Face repository"),
        (["serve", "Qwen/Qwen2.5-Coder-1.5B-Instruct"], "give it as --pair qwen2.5-coder-1.5b (serve takes no"),
        (["pull", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"], "is pair qwen2.5-coder-1.5b's Hugging Face repository"),
        (["tune", "https://huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"], "give it as qwen2.5-coder-1.5b"),
    ],
)
def test_a_hugging_face_repository_where_the_prompt_or_pair_goes(isolated, monkeypatch, command, needle):
    """`specchat run Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF` (a Hub id, as vLLM, llama.cpp's -hf and Ollama's
    hf.co/ take) was answered as a prompt, and with a prompt after it was told to quote the two as one."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # taken for a prompt, the default pair is not downloaded
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize("word", ["src/a.py", "src/a.py:12", "docs/usage"])
def test_a_one_word_prompt_with_a_slash_and_no_hub_sign_is_still_a_prompt(files, word):
    result = invoke("run", *files, word)
    assert result.exit_code == 0 and word in result.stdout, result.output


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "llama3.2:latest"], "llama3.2:latest reads as Ollama's name for a model: here a pair is --pair NAME"),
        (["run", "phi3:3.8b", "hi"], "phi3:3.8b reads as Ollama's name for a model"),
        (["run", "qwen2.5-coder", "hi"], "qwen2.5-coder reads as Ollama's name for a model"),
        (["run", "qwen2.5-coder", "hi"], "(did you mean --pair qwen2.5-coder-7b?)"),
        (["run", "qwen2.5-coder"], "qwen2.5-coder reads as Ollama's name for a model"),
        (["serve", "mistral:7b-instruct-q4_K_M"], "mistral:7b-instruct-q4_K_M reads as Ollama's name for a model"),
    ],
)
def test_ollamas_run_model_prompt_with_a_model_that_is_no_pair(isolated, monkeypatch, command, needle):
    """`specchat run llama3.2:latest` (Ollama's run MODEL) was answered as the prompt "llama3.2:latest", and
    `run qwen2.5-coder hi` told to quote the model and the prompt as one prompt."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # taken for a prompt, the default pair is not downloaded
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize("word", ["TODO:fix", "hello", "gemma", "12:30"])
def test_a_one_word_prompt_with_a_colon_or_near_a_pair_is_still_a_prompt(files, word):
    result = invoke("run", *files, word)
    assert result.exit_code == 0 and word in result.stdout, result.output


@pytest.mark.parametrize(
    "prompt",
    [
        "qwen2.5-coder: what context size do you have?",  # a pair's name before a colon, then a question
        "Qwen2.5-7B: hi",
        "TODO:1b",  # a size-like tag after a word that is no model's name
        "Exercise:3b",
        "wait:5m",
        "ETA:10m",
        "cost:1.5m",
        "tools/gguf-split",  # "gguf" in a path
        "../gguf",
        "src/gguf",
        "my-notes/GGUF",
        "src/a.py",
    ],
)
def test_prompts_that_only_look_like_a_models_name_are_prompts(isolated, prompt):
    """A reviewer's finds: each of these was refused as Ollama's name for a model or a Hub repository."""
    from specchat.cli import habits

    habits._positional("run", [prompt])  # no UsageError


@pytest.mark.parametrize("word", ["qwen2.5", "llama3.1", "llama3.2:latest"])
def test_with_a_pair_or_target_given_a_models_name_where_the_prompt_goes_is_the_prompt(files, word):
    """`run --pair P "qwen2.5"`: with the model given, the word can only be the prompt."""
    result = invoke("run", *files, word)
    assert result.exit_code == 0 and word in result.stdout, result.output


@pytest.mark.parametrize("path", ["./model.gguf", "models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"])
def test_a_model_files_path_with_a_slash_where_the_prompt_goes_names_target(isolated, path):
    """`run ./model.gguf` (llama.cpp's -m habit) read as a Hub repository ("models come as pairs here") once the
    Hub check came first: the file's own hint is --target FILE."""
    assert_one_line_error(invoke("run", path), 2, "here a model file is --target FILE")


def test_a_pairs_repository_after_hf_names_pair_only_where_the_command_has_it(isolated):
    result = invoke("models", "-hf", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF")
    assert_one_line_error(result, 2, "pair qwen2.5-coder-1.5b's target (`specchat models` lists it)")
    assert "--pair" not in result.stderr


def test_s_before_another_option_is_no_system_prompt(isolated):
    """`run -s --temperature 0.5 hi` said 'a system prompt is --system "--temperature"'."""
    result = invoke("run", "-s", "--temperature", "0.5", "hi")
    assert_one_line_error(result, 2, "-s is --seed here")  # llama.cpp's meaning: no words follow it
    assert "--system" not in result.stderr


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (['say "hi" to $HOME now'], """specchat run 'say "hi" to $HOME now'"""),  # pasted back, $HOME stays text
        (["what is `ls`"], "specchat run 'what is `ls`'"),  # pasted back, ls does not run
        (["why is the sky blue"], 'specchat run "why is the sky blue"'),
    ],
)
def test_a_hint_that_shows_the_prompt_quotes_it_for_the_shell(isolated, args, shown):
    """The hint put the prompt in double quotes whatever it held: pasted back, `$HOME` was expanded and a prompt
    with backticks ran the command in them."""
    assert_one_line_error(invoke(*args), 2, shown)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["logs", "list"], "`specchat logs` takes no subcommand: it lists the logged replies (-n N: the latest N"),
        (["logs", "list", "-n", "3"], "`specchat logs` takes no subcommand: it lists"),
        (["logs", "path"], "`specchat logs` takes no subcommand: the log's path is --path"),
        (
            ["logs", "off"],
            "`specchat logs` takes no subcommand: not logging is --no-log (run, serve) or SPECCHAT_NO_LOG=1",
        ),
        (["models", "list"], "`specchat models` takes no subcommand: it lists the pairs"),
    ],
)
def test_simonw_llms_subcommands_of_logs_and_models(isolated, command, needle):
    """`llm logs list`, `llm logs path`, `llm models list` were Click's 'Got unexpected extra argument(s) (list)'."""
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["logs", "-c"], "-c is not an option of logs: a conversation's replies are --cid ID (the latest one's ID: `"),
        (["logs", "--current"], "--current is not an option of logs: a conversation's replies are --cid ID"),
        (["logs", "--conversation", "3"], "--conversation is --cid here"),
        (["logs", "-t"], "-t has no equivalent: logs shows the first lines already (--full: whole)"),
        (["logs", "--truncate"], "--truncate has no equivalent: logs shows the first lines already"),
    ],
)
def test_simonw_llms_options_of_logs(isolated, command, needle):
    """`llm logs -c` (the current conversation), `--conversation ID`, `-t` were Click's "No such option: -c"
    with `see specchat logs --help`, though `run -c` is there and `logs --cid` does what they do."""
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "-o", "temperature", "0.5", "hi"], "-o has no equivalent: each setting is an option of its own here"),
        (["run", "--option", "top_k", "5", "hi"], "(--temperature T, --top-k K, --top-p P, --min-p P, --seed N"),
        (["serve", "-o", "temperature", "0.5"], "-o has no equivalent in serve: each request sets its sampling"),
    ],
)
def test_simonw_llms_o_option(isolated, command, needle):
    """llm's `-o temperature 0.5` was "No such option: -o", which did not say where the temperature goes."""
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize("flag", ["-hf", "--hf-repo", "-hfr"])
def test_llama_cpps_hf_with_a_pairs_repository_names_the_pair(isolated, flag):
    """`-hf Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M` said only that models come as pairs, not which."""
    result = invoke("run", flag, "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M", "hi")
    assert_one_line_error(result, 2, f"{flag} has no equivalent: that repository holds pair qwen2.5-coder-1.5b's")
    assert "--pair qwen2.5-coder-1.5b" in result.stderr
    assert_one_line_error(invoke("run", flag, "someone/Other-GGUF", "hi"), 2, f"{flag} has no equivalent: models come")


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["run", "--prompt-file", "p.txt"], "--prompt-file has no equivalent: a prompt from a file is stdin"),
        (["run", "--ignore-eos", "hi"], "--ignore-eos has no equivalent: a reply ends at the model's end of turn"),
        (["run", "--mirostat", "2", "hi"], "--mirostat has no equivalent: sampling is temperature, top-k"),
        (["serve", "--served-model-name", "m"], "--served-model-name has no equivalent: the model is served under"),
        (["serve", "-tp", "2"], "-tp has no equivalent: llama.cpp splits the layers over the GPUs"),
        (["run", "--lora", "a.gguf", "hi"], "--lora has no equivalent: no LoRA adapters"),
    ],
)
def test_more_of_llama_cpps_and_vllms_flags_are_named(isolated, command, needle):
    """A QA helper's list: these were Click's 'No such option', some with a wrong guess (--ignore-eos: --no-log)."""
    assert_one_line_error(invoke(*command), 2, needle)


@pytest.mark.parametrize(
    "prompt", ["- item one\n- item two", "-5 degrees: is that cold?", "--what does this do", "-a=b is c"]
)
def test_a_prompt_that_starts_with_a_dash_says_to_put_it_after_double_dash(isolated, prompt):
    """`specchat run "$(cat notes.md)"` with a list for notes was Click's "No such option: - " (Click names the
    first letter of the words), its hint `--help`: no option has a space in its name, so the words are a prompt,
    which goes after `--`."""
    result = invoke("run", prompt)
    assert_one_line_error(result, 2, "starts with '-', so it reads as an option")
    assert "specchat run -- " in result.stderr and "No such option" not in result.stderr, result.stderr


@pytest.mark.parametrize("options", [["-n 4"], ["-k 4", "-n 4"]])
def test_options_with_a_value_after_a_space_are_still_options(fake_models, options):
    """`run "-n 100" hi` (a script's quoted "$OPTS") is Click's -n with the value " 100", as before the prompt rule
    above: it was refused as "the prompt '-n 100' starts with '-'" (a reviewer's catch)."""
    target, draft = fake_models
    result = invoke("run", "--target", str(target), "--draft", str(draft), *options, "hi")
    assert result.exit_code == 0 and "starts with '-'" not in result.stderr, result.output
