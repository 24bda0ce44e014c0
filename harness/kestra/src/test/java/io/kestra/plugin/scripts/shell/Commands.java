package io.kestra.plugin.scripts.shell;

import java.util.List;

import io.kestra.core.exceptions.IllegalVariableEvaluationException;
import io.kestra.core.models.property.Property;
import io.kestra.core.models.tasks.RunnableTask;
import io.kestra.core.models.tasks.runners.TargetOS;
import io.kestra.core.runners.RunContext;
import io.kestra.plugin.scripts.exec.AbstractExecScript;
import io.kestra.plugin.scripts.exec.scripts.models.DockerOptions;
import io.kestra.plugin.scripts.exec.scripts.models.ScriptOutput;
import io.swagger.v3.oas.annotations.media.Schema;
import jakarta.validation.constraints.NotNull;
import lombok.Builder;
import lombok.EqualsAndHashCode;
import lombok.Getter;
import lombok.NoArgsConstructor;
import lombok.ToString;
import lombok.experimental.SuperBuilder;

/**
 * TEST-ONLY STAND-IN for {@code io.kestra.plugin.scripts.shell.Commands} (kestra-io/plugin-scripts,
 * module plugin-script-shell), which Maven Central does not serve. Everything it runs on is the
 * served engine: {@link AbstractExecScript} and its {@code CommandsWrapper} from {@code io.kestra:script}
 * (env, inputFiles, outputFiles, namespaceFiles, the task runner — the real Docker runner in the shipped
 * flows — and Kestra's stdout parser).
 *
 * <p>What the real task adds to AbstractExecScript, and so what this class adds, written from reading
 * its source: two properties, {@code containerImage} (default {@code ubuntu}, used when the runner's own
 * options name no image) and {@code commands} (required); the interpreter, {@code beforeCommands},
 * {@code failFast} and {@code targetOS} of AbstractExecScript are passed to the wrapper, and the before
 * commands are prefixed with {@code set -e} (failFast), so the container runs
 * {@code /bin/sh -c "set -e\n<command>..."}. No other property exists: Kestra's flow parser refuses
 * any other key (see {@code FlowValidationTest}).
 */
@SuperBuilder
@ToString
@EqualsAndHashCode
@Getter
@NoArgsConstructor
@Schema(title = "Test-only stand-in for the Shell Commands task (same properties, same behaviour).")
public class Commands extends AbstractExecScript implements RunnableTask<ScriptOutput> {
    static final String DEFAULT_IMAGE = "ubuntu";

    @Builder.Default
    protected Property<String> containerImage = Property.ofValue(DEFAULT_IMAGE);

    @Schema(title = "Shell commands to run")
    @NotNull
    protected Property<List<String>> commands;

    @Override
    protected DockerOptions injectDefaults(RunContext runContext, DockerOptions original) throws IllegalVariableEvaluationException {
        if (original.getImage() != null) {
            return original;
        }
        String image = runContext.render(containerImage).as(String.class).orElse(null);
        return original.toBuilder().image(image).build();
    }

    @Override
    public ScriptOutput run(RunContext runContext) throws Exception {
        TargetOS target = runContext.render(targetOS).as(TargetOS.class).orElse(null);
        return commands(runContext)
            .withInterpreter(interpreter)
            .withBeforeCommands(beforeCommands)
            .withBeforeCommandsWithOptions(true)
            .withCommands(commands)
            .withTargetOS(target)
            .run();
    }
}
