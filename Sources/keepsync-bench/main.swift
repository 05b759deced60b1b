// keepsync-bench: keepsync against cp -a, rsync -a and lsyncd, measured in the same run.
BenchMain.run()
