package dev.changesink.kestra;

import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.TaskRun;

/**
 * One iteration of a flow's loop task (a Loop in Kestra 2.0, a ForEach in 1.x): the value it ran with, the
 * execution that holds its task runs (2.0: an execution of its own; 1.x: the flow's execution) and the run of
 * the task asked for in it.
 */
record Iteration(String value, Execution execution, TaskRun taskRun) {
}
