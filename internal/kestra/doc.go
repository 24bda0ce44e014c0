// Package kestra speaks the Kestra script-task protocol for every changesink
// task family, and is the only package that prints protocol lines.
//
// Kestra's script runners read the container's stdout and stderr line by line
// and parse a line only when it is exactly `::{json}::`
// (io.kestra.core.models.tasks.runners.TaskLogLineMatcher, regex
// `^::(\{.*})::$`). Such a line may carry:
//
//   - "outputs": a JSON object merged into `outputs.<task>.vars`;
//   - "metrics": counters (float values) and timers (seconds);
//   - "logs": log entries with an explicit level (ERROR, WARN, INFO, DEBUG).
//
// Every other stdout line is shown as INFO and every stderr line as ERROR, so
// changesink logs to stdout only and uses "logs" lines for WARN and ERROR.
//
// For a person at a terminal, NewTextEmitter prints the same messages,
// outputs and metrics as plain text, warnings and errors on stderr, and no
// protocol line; cmd/changesink chooses (--output, CHANGESINK_OUTPUT).
//
// Protocol lines are written as pure ASCII (non-ASCII runes escaped as \uXXXX):
// the Docker runner decodes each 16 KiB log frame separately, so a multi-byte
// UTF-8 rune cut at a frame boundary would corrupt the JSON (the runner,
// io.kestra.plugin.scripts.runner.docker.Docker in kestra-io/plugin-scripts,
// decodes each docker-java log frame on its own). Every string that reaches
// stdout passes through the emitter's secret masker first.
//
// Output files are written into the task's working directory (WORKING_DIR when
// Kestra sets it, else the current directory) with write-to-temp-then-rename,
// so a crashed run never leaves a half-written report that outputFiles would
// upload.
package kestra
