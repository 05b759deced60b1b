import KeepSyncLinux

LinuxProcess.prepare()
LinuxProcess.exit(CommandRunner(arguments: LinuxProcess.arguments, environment: LinuxProcess.environment).run())
