//! `memliner run`'s flags for the agent's options, made from the agent's option table
//! (`options::OPTIONS`): one flag per option that has one, its help the table's text, its
//! value set through the agent's own parser. A new option gets its flag by being in the table.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use memliner_contracts::options::{OptionError, Options, RunDefault, OPTIONS};

/// The agent options given on `memliner run`'s command line, as (key, value) in table order.
#[derive(Clone, Debug, Default)]
pub struct AgentFlags(Vec<(&'static str, String)>);

impl AgentFlags {
    /// The agent's options these flags ask for, over `memliner run`'s own defaults (`25%`
    /// local); a bad value is the agent's one-line error, naming its key.
    pub fn options(&self) -> Result<Options, OptionError> {
        let mut o = Options::default();
        for spec in OPTIONS {
            if let Some(RunDefault::Value(v)) = spec.flag.as_ref().map(|f| &f.run_default) {
                o.set(spec.key, v)?;
            }
        }
        for (key, value) in &self.0 {
            o.set(key, value)?;
        }
        o.check()?;
        Ok(o)
    }
}

/// The help text of an option: the table's Markdown without its code marks.
fn help(values: &str, default: &str) -> String {
    format!("{values} [default: {default}]").replace('`', "")
}

impl Args for AgentFlags {
    fn augment_args(cmd: Command) -> Command {
        OPTIONS.iter().fold(cmd, |cmd, spec| {
            let Some(flag) = &spec.flag else { return cmd };
            let default = match &flag.run_default {
                RunDefault::Agent => spec.default.to_string(),
                RunDefault::Value(v) => v.to_string(),
                RunDefault::Provided(what) => what.to_string(),
            };
            cmd.arg(
                Arg::new(spec.key)
                    .long(flag.long)
                    .value_name(flag.value_name)
                    .help(help(spec.values, &default))
                    .action(if flag.repeat {
                        ArgAction::Append
                    } else {
                        ArgAction::Set
                    }),
            )
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for AgentFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let given = OPTIONS
            .iter()
            .filter(|spec| spec.flag.is_some())
            .filter_map(|spec| {
                let values: Vec<String> = m.get_many::<String>(spec.key)?.cloned().collect();
                Some((spec.key, values.join("+")))
            })
            .collect();
        Ok(AgentFlags(given))
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Run {
        #[command(flatten)]
        agent: AgentFlags,
    }

    fn options(args: &[&str]) -> Result<Options, String> {
        let run = Run::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        run.agent.options().map_err(|e| e.to_string())
    }

    #[test]
    fn flags_set_the_agents_options_through_its_parser() {
        let o = options(&[]).unwrap();
        assert_eq!(o.render(), "local=25%", "run's own default");
        let o = options(&[
            "--server",
            "h:1",
            "--server",
            "tcp://h:2",
            "--local",
            "512m",
            "--emulate-latency",
            "3us",
            "--token-file",
            "/t",
            "--faults",
            "thread",
        ])
        .unwrap();
        assert_eq!(
            o.render(),
            "server=tcp://h:1+tcp://h:2,local=536870912,faults=thread,token_file=/t,latency=3us"
        );
        let e = options(&["--policy", "fast"]).unwrap_err();
        assert_eq!(
            e,
            "bad value for 'policy': 'fast': expected one of memliner, baseline, off"
        );
        let e = options(&["--replicas", "3", "--server", "h:1"]).unwrap_err();
        assert!(e.contains("3 copies need 3 memory servers"), "{e}");
        // `probe` has no flag.
        assert!(options(&["--probe", "5"]).is_err());
    }

    #[test]
    fn every_flag_has_the_tables_help() {
        let cmd = <Run as clap::CommandFactory>::command();
        for spec in OPTIONS.iter().filter(|s| s.flag.is_some()) {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == spec.key)
                .unwrap_or_else(|| panic!("no flag for {}", spec.key));
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(
                help.starts_with(&spec.values[..20].replace('`', "")),
                "{help}"
            );
        }
    }
}
