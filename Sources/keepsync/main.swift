import KeepSyncLinux

CommandRunner.main()
